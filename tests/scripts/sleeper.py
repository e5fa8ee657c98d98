import sys, time
def sleeping_in_here():  # the frame a stack dump must show
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 120)
print("READY", flush=True)
sleeping_in_here()

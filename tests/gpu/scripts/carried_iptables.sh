#!/bin/bash
# Puts an `iptables` on PATH for tests/gpu/test_link_gpu.py where the device
# image has none: Debian's iptables and its libraries, carried as .debs in
# .carry/ipt-debs (`apt-get download iptables libxtables12 libip4tc2 libip6tc2
# libnftnl11 libmnl0 libnetfilter-conntrack3 libnfnetlink0`), unpacked under
# /tmp/ipt, never into / (an unpacked package can break the image).
# Usage: source tests/gpu/scripts/carried_iptables.sh   (prints which backend works)
if command -v iptables >/dev/null && iptables -L OUTPUT >/dev/null 2>&1; then
  echo "iptables: the image's own"; return 0 2>/dev/null || exit 0
fi
rm -rf /tmp/ipt; mkdir -p /tmp/ipt/bin
for f in .carry/ipt-debs/*.deb; do dpkg -x "$f" /tmp/ipt; done
lib=/tmp/ipt/usr/lib/x86_64-linux-gnu
for backend in nft legacy; do
  cat > /tmp/ipt/bin/iptables <<W
#!/bin/sh
LD_LIBRARY_PATH=$lib XTABLES_LIBDIR=$lib/xtables exec /tmp/ipt/usr/sbin/xtables-$backend-multi iptables "\$@"
W
  chmod +x /tmp/ipt/bin/iptables
  if /tmp/ipt/bin/iptables -L OUTPUT >/tmp/ipt/probe.log 2>&1; then
    export PATH=/tmp/ipt/bin:$PATH; echo "iptables: carried, $backend backend"; return 0 2>/dev/null || exit 0
  fi
  echo "iptables ($backend backend) failed: $(tail -n 1 /tmp/ipt/probe.log)"
done
rm -f /tmp/ipt/bin/iptables
echo "iptables: none works here (CapEff $(awk '/CapEff/{print $2}' /proc/self/status))"

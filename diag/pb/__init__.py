"""Generated gRPC stubs: `make proto` writes them from protos/; never edit by hand."""

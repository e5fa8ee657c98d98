"""The job-wide collector: a gRPC server that ingests agents' NodeReports,
applies the hang rules, asks agents for stacks and writes event directories.

Entry points: ``python -m diag.collector`` and
``diag.collector.server.create_server(listen_addr, config)``. See docs/collector.md.
"""

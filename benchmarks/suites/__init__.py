"""The benchmarks' code: one module per subcommand of the entry points in benchmarks/, each with
add_arguments(parser) and main(args); benchmarks/common.py holds what they share."""

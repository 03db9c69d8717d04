from allreduce_bench.cli import main

main(prog_name="allreduce-bench")

from lerobench.cli import main

main()

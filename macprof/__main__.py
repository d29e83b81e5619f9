from macprof.cli import main

main()

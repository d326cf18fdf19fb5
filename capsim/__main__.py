from capsim.cli.main import main

main()

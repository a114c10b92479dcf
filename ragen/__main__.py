from ragen.cli import main

main()

"""python -m tfcli"""

from tfcli.start import main

main()

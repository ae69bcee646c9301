"""Result directories: what each kind holds and is told apart by (`layout`), how one is written
whole and what may be replaced (`directories`), how its files are read, bad ones being bad input
(`reading`), and the library's compare, which writes one (`compare`)."""

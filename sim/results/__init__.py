"""Result directories: what each kind holds and is told apart by (`layout`), and the library
calls that write them (`compare`)."""

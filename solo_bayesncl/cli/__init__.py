"""Every console command, one ``main`` a module. Heavy imports wait inside ``main`` until the
arguments are read, so ``--help`` and input errors answer at once."""

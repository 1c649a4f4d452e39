"""Every console command: pretrain, linear, kNN, evaluate, benchmark, zoo and dashboard.

Each module holds one command's ``main``; the work is done by the library below it. Heavy imports
(torch, solo-learn) wait inside ``main`` until the arguments are read, so ``--help`` and input
errors answer at once."""

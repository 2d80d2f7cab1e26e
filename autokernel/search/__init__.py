"""The overnight search: a run's session, the keep-or-revert loop (one GPU, or several: lanes and proposals), its
rules, budget and state, results.tsv, git, and the checks around each bench."""

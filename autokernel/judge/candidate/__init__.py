"""The candidate's process (the worker): it imports the kernel file and runs kernel_fn when the judge asks, under
guards that refuse library compute and note tampering. The verdict is never decided here."""

"""Reading and writing files: checkpoints of every supported layout, zoo artifacts, and writes
that never leave a half-written file where a user's file was."""

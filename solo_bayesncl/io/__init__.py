"""Reading and writing files: checkpoints of every layout, zoo artifacts, safe writes."""

"""nvhook: give containers NVIDIA GPUs."""

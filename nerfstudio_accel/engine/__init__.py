"""The trainer (precision, non-finite guard, atomic checkpoints, resume), building configs as ns-train does, optimizers and schedulers."""

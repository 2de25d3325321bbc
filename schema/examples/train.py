"""A stand-in for a training script, so the examples here submit and run anywhere:
it reports what carma gave it and "trains" for a few seconds."""
import os
import sys
import time

print("args:", " ".join(sys.argv[1:]))
print("GPUs:", os.environ.get("CUDA_VISIBLE_DEVICES", "none"), "task", os.environ.get("CARMA_TASK_ID"))
for epoch in range(3):
    time.sleep(1)
    print(f"epoch {epoch}: loss {1.0 / (epoch + 1):.3f}", flush=True)

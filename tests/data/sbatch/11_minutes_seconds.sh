#!/bin/bash
#SBATCH -t 30:00
#SBATCH -G 1
#SBATCH -J smoke
#SBATCH -o smoke.%j.%N.log
python -c "import torch; print(torch.cuda.get_device_name())"

#!/opt/conda/envs/train/bin/python
#SBATCH --nodes=2
#SBATCH --gres=gpu:2
#SBATCH --time=4:00:00
import torch
print(torch.cuda.device_count())

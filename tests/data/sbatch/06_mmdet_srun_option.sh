#!/usr/bin/env bash
#SBATCH -p dev
#SBATCH --gres=gpu:2
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=5
#SBATCH --kill-on-bad-exit=1
#SBATCH -J mmdet

PYTHONPATH="$(dirname $0)/..":$PYTHONPATH
srun python -u tools/train.py configs/retinanet_r50_fpn_1x_coco.py --launcher=slurm

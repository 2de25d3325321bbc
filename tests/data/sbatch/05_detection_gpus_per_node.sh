#!/bin/bash
#SBATCH --job-name=mask_rcnn_R50
#SBATCH --gpus-per-node=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=10
#SBATCH --mem-per-cpu=4G
#SBATCH --time=72:00:00
#SBATCH --partition=gpu
#SBATCH --constraint=volta32gb
#SBATCH --output=/dev/null
#SBATCH --error=det_%j.err

python tools/train_net.py --num-gpus 2 --config-file configs/mask_rcnn_R_50_FPN_3x.yaml

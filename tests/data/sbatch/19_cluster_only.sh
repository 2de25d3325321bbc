#!/bin/bash
#SBATCH -A proj-123 -q gpu-normal
#SBATCH -C "a100&ib"
#SBATCH -L scratch:1
#SBATCH --clusters=gpucluster
#SBATCH -w gpunode07
#SBATCH --exclude=gpunode01
#SBATCH --reservation=conference
#SBATCH --hint=nomultithread
#SBATCH --nice=10
#SBATCH --gres=gpu:1
#SBATCH -t 20:00
#SBATCH -J eval
python evaluate.py

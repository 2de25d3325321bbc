#!/bin/bash
#SBATCH --job-na=prefixed
#SBATCH --gpus-per-n=1
#SBATCH --ntasks-per-n=1
#SBATCH --cpus-per-t=2
#SBATCH --time=20
python eval.py

#!/bin/bash
#SBATCH --time=UNLIMITED
#SBATCH --gres=gpu:1
#SBATCH --account=vision-lab
#SBATCH --qos=normal
#SBATCH -J notebook
jupyter lab --no-browser --port=8888

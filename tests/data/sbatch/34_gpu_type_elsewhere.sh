#!/bin/bash
#SBATCH --gres=gpu:v100:4
#SBATCH --time=12:00:00
#SBATCH --job-name=finetune-v100
python finetune.py --fp16

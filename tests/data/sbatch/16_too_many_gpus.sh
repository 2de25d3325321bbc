#!/bin/bash
#SBATCH --gpus=16
#SBATCH --time=7-00:00:00
#SBATCH -J llama-sft
torchrun --nproc_per_node=16 train.py

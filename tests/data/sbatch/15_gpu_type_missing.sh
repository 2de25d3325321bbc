#!/bin/bash
#SBATCH --gres=gpu:v100:1
#SBATCH -t 2:00:00
#SBATCH -J bert-ft
python run_glue.py --model_name_or_path bert-base-uncased --task_name mrpc

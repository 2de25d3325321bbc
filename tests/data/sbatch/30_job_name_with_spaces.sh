#!/bin/bash
#SBATCH --job-name="bert large *"
#SBATCH --gres=gpu:1
#SBATCH --time=45
python run_glue.py --model_name_or_path bert-large-uncased

#!/bin/bash
#SBATCH --job-name=torch-test    # short name for the job
#SBATCH --nodes=1                # node count
#SBATCH --ntasks=1               # total tasks across all nodes
#SBATCH --cpus-per-task=2        # cpu-cores per task
#SBATCH --mem=8G                 # total memory per node
#SBATCH --gres=gpu:1             # gpus per node
#SBATCH --time=00:05:00          # total run time limit (HH:MM:SS)
#SBATCH --mail-type=begin        # mail when the job begins
#SBATCH --mail-type=end          # mail when the job ends
#SBATCH --mail-user=someone@example.org

module purge
module load anaconda3/2024.2
conda activate torch-env
python mnist_classify.py --epochs=2

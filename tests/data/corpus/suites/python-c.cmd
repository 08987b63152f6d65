# attacks: python -c running any code, with -m pytest only inside the code string
python -c "import os; os.remove(os.environ['SUITE_VICTIM']) # -m pytest"

"""End-to-end training benchmark of Llama-family decoders and Hugging Face models (defined in nn): modes, runner, breakdown, parity, ablation, plots."""

"""End-to-end training benchmark of Llama-family decoders: model, modes, runner, ablation, plots."""

"""A job that builds a Hugging Face causal LM from the config file named on its command line
and trains it for two steps on CPU, printing each step's loss. The sweep job beside it
(hf_configs_job.py) trains each of its models with ``train``."""

import sys

import torch
import transformers


def train(config_path: str, label: str = "") -> None:
    """Two steps of the causal LM of ``config_path`` (a config file or folder), each loss printed after ``label``."""
    config = transformers.AutoConfig.from_pretrained(config_path)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 200, (2, 16))
    for step in range(2):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"{label}step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    train(sys.argv[1])

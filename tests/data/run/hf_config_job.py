"""A job that builds a Hugging Face causal LM from the config file named on its command line
and trains it for two steps on CPU, printing each step's loss."""

import sys

import torch
import transformers

config = transformers.AutoConfig.from_pretrained(sys.argv[1])
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 200, (2, 16))
for step in range(2):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step} loss {loss.item():.4f}")

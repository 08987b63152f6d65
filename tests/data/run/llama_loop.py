"""A user's plain training loop: a Llama-shaped model from a config, synthetic tokens, bf16
autocast on a GPU, AdamW. No trainstack in it.

python llama_loop.py [--layers L --hidden H --batch B --seq S] [--warmup W --timed T --extra E]
    [--mem-gib G]   cap this process's CUDA allocator at G GiB (torch.cuda.set_per_process_memory_fraction)
After warm-up it times T steps and prints one JSON line (tokens/s, peak memory), then runs E
more steps untimed (printing 'step i' as each ends) and prints the peaks again at the end.
"""

import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def peaks():
    if not torch.cuda.is_available():
        return {}
    return {"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved()}


def main():
    p = argparse.ArgumentParser()
    for name, default in (("layers", 2), ("hidden", 64), ("batch", 2), ("seq", 32), ("warmup", 2), ("timed", 3), ("extra", 0)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--mem-gib", type=float, default=0.0)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.mem_gib and device == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(args.mem_gib * 2**30 / total, 1.0))
    torch.manual_seed(0)
    heads = max(args.hidden // 128, 1)
    config = LlamaConfig(
        vocab_size=32000, hidden_size=args.hidden, intermediate_size=int(8 * args.hidden / 3) // 64 * 64 or 64,
        num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=args.seq,
    )
    model = LlamaForCausalLM(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=device)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.timed):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"timed": args.timed, "seconds": seconds, "tokens_per_s": args.timed * args.batch * args.seq / seconds, **peaks()}), flush=True)
    for i in range(args.extra):
        step()
        print(f"step {args.warmup + args.timed + i}", flush=True)
    print(json.dumps({"end": True, **peaks()}), flush=True)


if __name__ == "__main__":
    main()

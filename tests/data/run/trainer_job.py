"""A user's Hugging Face Trainer job: a small Llama from a config, synthetic tokens, no download.

python trainer_job.py --steps N [--layers L] [--hidden H] [--batch B] [--seq S] [--timed T] [--out DIR]
"""

import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab):
        self.data = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


class Throughput(TrainerCallback):
    """Prints each step's end, and steps per second over steps 3 to 3 + timed."""

    def __init__(self, step_seconds, timed):
        self.step_seconds = step_seconds
        self.timed = timed
        self.t0 = None

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if state.global_step == 3:
            self.t0 = time.perf_counter()
        if self.t0 is not None and state.global_step == 3 + self.timed:
            seconds = time.perf_counter() - self.t0
            print(json.dumps({"timed": self.timed, "seconds": seconds, "steps_per_s": self.timed / seconds}), flush=True)
        print(f"step {state.global_step}", flush=True)
        time.sleep(self.step_seconds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--timed", type=int, default=2, help="steps timed after the first 3")
    parser.add_argument("--out", default="trainer-out")
    args = parser.parse_args()
    config = LlamaConfig(
        vocab_size=1024, hidden_size=args.hidden, intermediate_size=4 * args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=max(args.hidden // 64, 1), num_key_value_heads=max(args.hidden // 64, 1), max_position_embeddings=args.seq,
    )
    model = LlamaForCausalLM(config)
    training = TrainingArguments(
        output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=args.batch, learning_rate=1e-4,
        logging_steps=1000, save_strategy="no", report_to=[], use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(), dataloader_num_workers=0, disable_tqdm=True,
    )
    dataset = Tokens(args.batch * (args.steps + 1), args.seq, config.vocab_size)
    Trainer(model=model, args=training, train_dataset=dataset, callbacks=[Throughput(args.step_seconds, args.timed)]).train()


if __name__ == "__main__":
    main()

"""Models and their shapes, shared by bench, memplan and run: the Llama-family decoder and its
presets, Hugging Face configs (checked, loaded and built), the training-mode grammar and the
library versions these support. Imports nothing of the verbs above it."""

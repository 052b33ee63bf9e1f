"""Generation backends behind one interface (`base.Engine`): hf (CPU default), vllm (GPU)."""

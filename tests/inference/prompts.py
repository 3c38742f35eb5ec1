"""Prompts shared by the backend tests (hf, vllm): SmolLM2 opens MEDIUM with a newline, LIST goes on with a list."""

SHORT = "The capital of France is"
MEDIUM = (
    "Dialogue:\nAnna: Are we still meeting at five?\nBen: Yes, at the cafe.\nSummarize the above dialogue:"
)
LONG = (
    "Dialogue:\nTom: I lost my keys again.\nMia: Did you check the kitchen drawer?\nTom: Yes, and the car.\n"
    "Mia: Maybe you left them at the office yesterday evening.\nTom: I will call the front desk.\n"
    "Summarize the above dialogue:"
)
LIST = "Here is a list of fruits:\n1. Apple\n2."

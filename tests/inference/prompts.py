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
# SmolLM2-135M-Instruct's most likely first token after this one is its end-of-sequence token: an empty answer
SILENT = (
    "You are a doctor, please answer the medical questions based on the patient's description.\n\nQuestion: Hi "
    "doctor, I have had a headache for two days and I feel dizzy when I stand up. What should I do?\nAnswer:"
)

"""dpicl: differentially private in-context learning."""

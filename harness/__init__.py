"""agent-rein: post-training the model that writes web-agent harnesses (AutoHarness on the web)."""

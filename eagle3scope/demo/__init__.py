"""Engine harness and demo models: what it takes to run the real SGLang EAGLE-3 engine on CPU."""

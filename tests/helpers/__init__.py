"""What tests share: the environment, servers on loopback (Temporal, a scripted
OpenAI-compatible model, S3), waiting, and generated files."""

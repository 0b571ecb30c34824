"""The answer stage: evidence in, a streamed answer with verified, numbered citations out."""

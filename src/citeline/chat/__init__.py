"""Conversations: stored turns, follow-up rewriting, cited-chunk memory, and the session that joins them."""


BXJyÄ
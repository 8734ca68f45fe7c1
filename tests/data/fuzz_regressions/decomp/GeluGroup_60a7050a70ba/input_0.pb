
BXJVÃ
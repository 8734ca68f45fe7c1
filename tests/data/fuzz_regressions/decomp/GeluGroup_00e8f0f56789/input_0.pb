
BXJP
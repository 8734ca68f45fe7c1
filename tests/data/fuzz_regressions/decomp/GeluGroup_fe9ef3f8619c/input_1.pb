
BbJf·
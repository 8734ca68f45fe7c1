
BbJfюд╩

BXJ`ºE,BGGH˜I±F´GpJJhFH¸GzI¢EÒEøBß=ÑH¨GH±G‡H™KŽIŸF®E•BžI–IFTH	G=|DgEJGHÙ=xFz¿¾DœE
HYIlDnJÜB
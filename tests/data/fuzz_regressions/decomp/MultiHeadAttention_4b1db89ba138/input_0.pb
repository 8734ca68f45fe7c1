
BqJÀäFŠF´>‹EÒEGË@0@ËCƒ:¯ÁXC­EÅ?©?GRG F±8&FH>¼¾BÖµ˜C-DSBE›Eþº¦Fè¿lHuE­G¡­;HN:%Äc?XAYI–Iž8
F*DuFÃDÐFD^FE'DXCoGŽ8EïE<CrEÕ<†°#HyC`?ÿ@0FF#DºFþ@ôDB]EcA<E+GÀµ,¤=LCG¹F®:ºC@ÁEñDûAÉHGfD|E2IO¾
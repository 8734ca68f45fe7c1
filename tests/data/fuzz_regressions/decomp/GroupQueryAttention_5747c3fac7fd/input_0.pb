
BqJ 7HFÿ@,ÂsEþDiFF?^BÍIöEA'F´AAóC
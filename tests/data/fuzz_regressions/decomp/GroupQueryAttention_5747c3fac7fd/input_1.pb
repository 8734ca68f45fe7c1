
BkJ %EÅCÄApAgD ?¬³wGÏ=óDŸE]ApE#E|D‹D
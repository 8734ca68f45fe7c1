	
BXJSHÏGTGºFaJ,I¡E/FMH